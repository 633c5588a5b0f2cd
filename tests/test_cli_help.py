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
