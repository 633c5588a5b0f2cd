"""Every flag of every `cader` subcommand says what it does: `cader SUB --help` has no option without help text.

jsonargparse takes a flag's help from the docstring entry of its parameter; an entry that names two parameters at
once (`lr, warmup_ratio: ...`) or a parameter left out gives a flag whose help is only its type and default.
"""

import contextlib
import io
import re

import pytest
from cader.cli.main import STAGES, TOOLS, main

# jsonargparse's own line after a flag's help: "(type: int, default: 0)", "(required, type: str)", "(default: ...)"
_TYPE_ONLY = re.compile(r"^\((required, )?(type|default):")


def options_without_help(help_text: str) -> list[str]:
    """The option lines of an argparse help text whose entry has no text but jsonargparse's type/default note."""
    missing = []
    for entry in re.split(r"\n(?=  -)", help_text):
        if not entry.startswith("  -"):
            continue
        first, *rest = [line.strip() for line in entry.splitlines()]
        parts = re.split(r"\s{2,}", first, maxsplit=1)   # "--flag FLAG   help text" (or help on the next line)
        text = " ".join([parts[1] if len(parts) > 1 else "", *rest]).strip()
        if not text or _TYPE_ONLY.match(text):
            missing.append(parts[0])
    return missing


def test_the_checker_finds_an_option_with_only_its_type():
    text = ("options:\n  -h, --help            Show this help message and exit.\n"
            "  --model.lr LR         (type: float, default: 1e-05)\n"
            "  --model.betas [ITEM,...]\n                        (type: tuple[float, float], default: (0.9, 0.999))\n"
            "  --data.fps FPS        frames per second sampled (type: float, default: 1.0)\n")
    assert options_without_help(text) == ["--model.lr LR", "--model.betas [ITEM,...]"]


def help_of(subcommand: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        main([subcommand, "--help"])
    assert exit_info.value.code in (0, None)
    return out.getvalue()


@pytest.mark.parametrize("subcommand", sorted({**STAGES, **TOOLS}))
def test_every_flag_of_every_subcommand_has_help(subcommand):
    text = help_of(subcommand)
    assert text.count("\n  -") >= 2, text[:500]   # the help was printed (at least --help and one flag)
    assert options_without_help(text) == []


def test_sft_help_leads_with_the_recipes_own_flags():
    text = help_of("sft")
    first_trainer = text.index("\n  --trainer.")
    for flag in ("--plan_only", "--num_threads", "--model.lr", "--model.lora_r", "--data.fps", "--data.max_length",
                 "--loss_guard.", "--progress_log."):
        assert text.index(flag) < first_trainer, flag


def test_the_frame_cache_script_shows_its_own_flags_before_the_sft_ones(capsys):
    from cader.scripts import fill_frame_cache

    with pytest.raises(SystemExit):
        fill_frame_cache.main(["--help"])
    text = capsys.readouterr().out
    options = text[text.index("\noptions:"):]
    assert "--workers WORKERS" in options and "--dry_run {true,false}" in options
    assert options.index("--workers") < options.index("--dry_run") < options.index("--ckpt_path") \
        < options.index("--model.lr")


# ---- the help cache of the stages whose parser imports Lightning or torch (cader.cli.help_cache) -------------------


@pytest.fixture
def fake_stage(monkeypatch, tmp_path):
    """`cader` with its stages replaced by one that prints a help text and exits as argparse does; counts calls."""
    import cader.cli.main as cli_main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CADER_HELP_CACHE", raising=False)
    calls = []

    def run_stage(name, args):
        calls.append([name, *args])
        print(f"usage: cader {name} [options]\n  --flag  what it does")
        raise SystemExit(0 if "--help" in args or "-h" in args else 2)

    monkeypatch.setattr(cli_main, "run_stage", run_stage)

    def cader(*args: str) -> tuple[int, str]:
        monkeypatch.setattr("sys.argv", ["cader", *args])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                code = cli_main.main()
            except SystemExit as done:
                code = done.code
        return code, out.getvalue()

    return cader, calls


def test_a_bare_help_is_rendered_once_then_printed_from_the_cache(fake_stage, tmp_path):
    cader, calls = fake_stage
    first, again, short = cader("sft", "--help"), cader("sft", "--help"), cader("sft", "-h")
    assert first == again == short == (0, "usage: cader sft [options]\n  --flag  what it does\n")
    assert calls == [["sft", "--help"]]   # -h is the same request
    assert cader("plan", "--help")[0] == 0 and calls[-1] == ["plan", "--help"]   # plan's text is its own
    assert len(list((tmp_path / "cache" / "cader" / "help").glob("*.txt"))) == 2


def test_only_a_bare_help_from_the_command_line_is_cached(fake_stage):
    import cader.cli.main as cli_main

    cader, calls = fake_stage
    cader("sft", "--config", "cot_mix_tiny", "--help")   # the help would show the config's values
    cader("sft", "--config", "cot_mix_tiny", "--help")
    cader("judge", "compare", "--help")   # a subcommand of the stage: its own parser
    cader("judge", "compare", "--help")
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
        cli_main.main(["sft", "--help"])   # called from Python (tests, scripts): never the cache
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
        cli_main.main(["sft", "--help"])
    assert len(calls) == 6


def test_a_changed_source_file_or_a_turned_off_cache_renders_again(fake_stage, monkeypatch, tmp_path):
    import os

    from cader.cli import help_cache

    cader, calls = fake_stage
    source = tmp_path / "module.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(help_cache, "source_files", lambda: [source])
    cader("eval", "--help")
    cader("eval", "--help")
    assert len(calls) == 1
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))   # an edit
    cader("eval", "--help")
    assert len(calls) == 2
    monkeypatch.setenv("CADER_HELP_CACHE", "0")
    cader("eval", "--help")
    assert len(calls) == 3


def test_a_failed_rendering_is_not_kept(fake_stage, monkeypatch):
    import cader.cli.main as cli_main

    cader, calls = fake_stage

    def broken(name, args):
        calls.append(name)
        raise SystemExit(2)

    monkeypatch.setattr(cli_main, "run_stage", broken)
    assert cader("merge", "--help") == (2, "")
    assert cader("merge", "--help") == (2, "")
    assert calls == ["merge", "merge"]


@pytest.mark.slow
def test_cader_sft_help_from_the_cache_imports_neither_lightning_nor_torch(tmp_path):
    # the first rendering builds LightningCLI's parser (7-30 s on 2 shared cores); the second only reads the text
    import subprocess
    import sys

    code = ("import sys\nfrom cader.cli.main import main\nsys.argv = ['cader', 'sft', '--help']\ncode = main()\n"
            "print('IMPORTED', sorted({m.split('.')[0] for m in sys.modules} & {'lightning', 'torch'}), code)")
    env = {**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                           check=True).stdout for _ in range(2)]
    assert runs[0].endswith("IMPORTED ['lightning', 'torch'] 0\n") and runs[1].endswith("IMPORTED [] 0\n")
    assert runs[0].rsplit("IMPORTED", 1)[0] == runs[1].rsplit("IMPORTED", 1)[0]
    assert "--trainer.max_steps" in runs[1]
