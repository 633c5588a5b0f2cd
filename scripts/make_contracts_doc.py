"""Write docs/contracts.md from the contract models in cader.contracts.records, so the document cannot say other
than the code:

    python scripts/make_contracts_doc.py                # rewrite docs/contracts.md
    python scripts/make_contracts_doc.py --check true   # exit 1 when docs/contracts.md is stale

tests/test_contracts.py runs the check.
"""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

from cader.contracts.records import CalibrationFile, JudgmentRecord, PredictionRecord, TimingRecord
from jsonargparse import CLI
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "contracts.md"

FILES = (
    ("predictions.jsonl", PredictionRecord, "one record per line, appended as each sample finishes",
     "evaluate/run.py", ("calibrate/fit.py, evaluate/run.py (resume, merge, report, --compare, --stage1_from), "
     "evaluate/judge.py")),
    ("timings.jsonl", TimingRecord, "one line per sample beside predictions.jsonl, appended after its record",
     "evaluate/run.py", "evaluate/run.py (report: wall-clock time), scripts/bench (samples per second)"),
    ("calibration.json", CalibrationFile, "one JSON object", "calibrate/fit.py", "evaluate/run.py --calibration"),
    ("judgments.jsonl", JudgmentRecord, "one record per line, appended as each question is judged",
     "evaluate/judge.py", "evaluate/judge.py (rerun, report, compare)"),
)

# Names the type column uses for the shared value types of cader.contracts.types and the unions of the models.
VALUE_TYPES = (
    ("Number", "a JSON number, integer or not, kept as written (true/false and strings are refused)"),
    ("Id", "an integer or a string, kept as written"),
    ("Window", "[start, end] in seconds: a list of exactly two Numbers"),
    ("Stage2Step", "one of ProposeStep, VerifyStep, ResampleStep, AnswerStep, told apart by its `phase`"),
    ("FitRecord", "FixedTemperatureRecord when its `fixed` is true, else TemperatureFitRecord"),
    ("Sweep", '"yes", "no" or "unknown"'),
    ("FailureTag", ("one of the 21 failure tags of AgentVidBench D.3 (cader.contracts.judgments.FAILURE_TAGS), "
     'or the paper\'s spelling "audio_tranerror" in older rows')),
)


def nested_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """`root` and every model its fields hold, depth first, each once."""
    found: list[type[BaseModel]] = []

    def visit(annotation) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.append(annotation)
                for info in annotation.model_fields.values():
                    visit(info.annotation)
            return
        for arg in typing.get_args(annotation):
            visit(arg)

    visit(root)
    return found


def anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def type_text(model: type[BaseModel], name: str, known: list[type[BaseModel]]) -> str:
    """The field's annotation as written in the model, with JSON names, models linked and `|` escaped."""
    text = model.__annotations__[name]
    literal_of_constant = re.fullmatch(r"Literal\[([A-Z_]+)\]", text)
    if literal_of_constant:  # Literal[SOME_TUPLE]: show the values
        text = (
            "Literal["
            + ", ".join(repr(v) for v in typing.get_args(model.model_fields[name].annotation))
            + "]"
        )
    text = re.sub(r"Literal\[(.*?)\]", lambda m: m.group(1).replace(", ", " | ").replace("'", '"'), text)
    for word, json_name in (
        ("str", "string"),
        ("int", "integer"),
        ("bool", "boolean"),
        ("None", "null"),
        ("Any", "any"),
        ("dict", "object"),
        ("True", "true"),
    ):
        text = re.sub(rf"\b{word}\b", json_name, text)
    for other in known:
        text = re.sub(rf"\b{other.__name__}\b", f"[{other.__name__}](#{anchor(other)})", text)
    return text.replace("|", "\\|")


def cell(text: str | None) -> str:
    """Text on one line, safe inside a Markdown table cell (no raw `|`, no `<...>` read as HTML)."""
    return " ".join((text or "").split()).replace("<", "&lt;").replace("|", "\\|")


def model_table(model: type[BaseModel], known: list[type[BaseModel]]) -> list[str]:
    lines = [
        f"### {model.__name__}",
        "",
        " ".join((model.__doc__ or "").split()),
        "",
        "| field | type | required | description |",
        "|---|---|---|---|",
    ]
    for name, info in model.model_fields.items():
        required = "yes" if info.is_required() else "no"
        lines.append(
            f"| `{name}` | {type_text(model, name, known)} | {required} | {cell(info.description)} |"
        )
    return lines + [""]


def render() -> str:
    """docs/contracts.md as the models say it."""
    models = [m for _, root, *_ in FILES for m in nested_models(root)]
    lines = [
        "# File contracts between the stages",
        "",
        "<!-- generated by scripts/make_contracts_doc.py from cader.contracts.records; do not edit by hand -->",
        "",
        "The files that join the stages are pydantic models in `contracts/` (`cader.contracts.records`). Writers build",
        "their records through them and readers validate through them; a record that breaks its contract is",
        "reported with file, line and field. Every model keeps keys it does not know (they survive a round trip)",
        "and takes values only in their JSON type: a number must be a JSON number, a flag true or false.",
        "",
        "| file | model | shape | written by | read by |",
        "|---|---|---|---|---|",
    ]
    for file, root, shape, writer, readers in FILES:
        lines.append(f"| `{file}` | [{root.__name__}](#{anchor(root)}) | {shape} | {writer} | {readers} |")
    lines += ["", "Value types used below:", ""]
    lines += [f"- **{name}**: {meaning}" for name, meaning in VALUE_TYPES]
    lines.append("")
    for file, root, *_ in FILES:
        lines += [f"## {file}", ""]
        for model in nested_models(root):
            lines += model_table(model, models)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(check: bool = False) -> int:
    """Write docs/contracts.md, or with `check` only compare it with what the models say.

    Args:
        check: Exit 1 (and write nothing) when docs/contracts.md differs from a regeneration.
    """
    text = render()
    if check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(
                f"{DOC.relative_to(REPO)} is stale: run python scripts/make_contracts_doc.py", file=sys.stderr
            )
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(CLI(main))
